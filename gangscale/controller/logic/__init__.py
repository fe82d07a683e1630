"""The controller's decisions, pure: no I/O, no clock, no event loop (the ``pure-controller-logic`` contract).

Each module takes plain data and the time and returns plain data: how one request moves on (``reconcile``,
``request``, ``record``, ``conditions``), what it holds and books (``bookings``, ``holdings``, ``rebook``,
``verify``), what the planner is given (``planinput``, ``view``, ``indices``), what is in flight (``ledger``),
when work is due (``workqueue``, ``batching``, ``backoffs``, ``isolation``) and which units are unneeded
(``unneeded``). Tested in tables on plain objects.
"""
