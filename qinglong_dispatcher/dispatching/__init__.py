"""The dispatch path: `Dispatcher.dispatch_batch` claims a page and takes each item through it.

`dispatcher` runs a batch; `page_path` takes a page's transactional items through one page
transaction; `claimed_item` takes one claimed item from its start to its completion, with the
`start_barriers` and `grouped_completions` it waits at, both built on `gathering`.
"""
