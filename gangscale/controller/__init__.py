"""The controller: requests in, decisions made whole, capacity obtained and reported back.

Where things are, from the top (each layer imports only the ones below it; ``.importlinter`` holds it to that):

- **The runtime, which does the I/O**: ``loop`` (reflectors, waiting, one pass at a time, starting effects as
  guarded tasks, ``tasks``), ``startup`` (provider start and recovery of recorded intents, ``recovery``),
  ``health`` (``/healthz``, ``/readyz``), ``app`` (the ``gangscale run`` process), ``preflight``.
- **The pass, which does none itself**: ``passes.run_pass(core, changes, results, now) -> effects`` over the
  state in ``core``; ``outcomes`` starts scale-ups and applies their results; ``writer`` and ``removals`` decide
  status writes and scale-downs and ask for them as effects. Tested in tables on plain objects
  (``tests/controller/test_pass.py``).
- **The effects**: coroutines that do the I/O a pass asked for (``effects``, through ``actuator`` to the
  provider), run by the runtime, their results handed back to the next pass. ``report`` builds what
  ``/debug/plans`` and the gauges show.
- **Where requests come from**: ``demand`` (the source protocol, the registry, the ProvisioningRequest and Ray
  sources).
- **The decisions, pure**: ``logic`` (one request's transitions, bookings, the planner's input, the ledger of
  capacity in flight, the work queue and batching, unneeded units): plain data and the time in, plain data out.
"""
