"""The dispatch path: `Dispatcher.dispatch_pages` claims pages and takes each item through them.

`dispatcher` claims a page and runs a call's pages; `page_flow` lets them overlap (the next page
is claimed once the page before has a worker for every item); `page_path` takes a page's
transactional items through one page transaction; `claimed_item` takes one claimed item from
its start to its completion, with the `start_barriers` and `grouped_completions` it waits at,
both built on `gathering`.
"""
