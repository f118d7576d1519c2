"""State: the stores a processor keeps, their changelog, and restoring them.

``store.py`` the key → value stores a processor writes (changelogged at every commit);
``restore.py`` reading a changelog back into them, from the beginning or from the offset a
store already applied; ``position.py`` the task's position record; ``kept.py`` the state of
partitions this process does not own at the moment, kept and tailed so that a partition
that comes back restores only what was written since; ``disk.py`` the persistent store, a
partition's RocksDB database and its checkpoint; ``cached.py`` values on disk, read through a
bounded cache. docs/engine.md, "State".
"""
