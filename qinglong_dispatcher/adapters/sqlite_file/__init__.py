"""The edge SQLite file on its device, beside the store: made private to its owner and checked
writable (`access`), held by one daemon (`authority`), its owner the principal (`os_user`), the
disk reserve (`reserve`), the vacuum mode (`space`) and the start-up check (`integrity`).

Operating-system concerns of one file: no module here imports the store or another adapter;
the store calls them (those taking a `sqlite3.Connection` on its one worker thread).
"""
