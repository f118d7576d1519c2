"""``python -m bench.rebalance``: a deployment scaled as operators scale it, with the state
users have, and every run checked afterwards (issues 32 and 36).

1. ``--runs`` open runs (index 0 of each, a million by default) over ``--partitions`` (12),
   projected by ``--instances`` (2) ``symfonic-stream run typed`` processes until their
   group's committed offsets reach the end.
2. A probe run per partition publishes an event every 50 ms; each probe output is timed as
   it becomes readable (read_committed).
3. The scale events, in order: ``join`` (one more instance), ``leave`` (that one goes,
   SIGTERM), ``kill-restart`` (an instance SIGKILLed and a new one started in its place,
   on its persistent store's folder with ``--state-dir``). For each: the stall (the longest
   wait between two probe outputs of a partition it caused, the time until every
   partition produced again), the changelog records the instances read at set-up, and the
   probes' outputs per second in the 5 s before and after.
4. Every run gets its closing event (``done`` at index 1); the group catches up.
5. The typed topic is read whole and compared, run by run and byte for byte, with the
   reference oracle's projection (``tests/reference/oracle.py``) of everything published.

``--partitions-only N`` instead measures one instance on N partitions (256 in the issue):
the time from its start to its first output, and its transactions per second at a
trickle of 200 events a second spread over every partition (:mod:`.partitions`).
"""
