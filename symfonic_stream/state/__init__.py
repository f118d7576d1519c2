"""State: the stores a processor keeps, their changelog, and restoring them.

``store.py`` the key → value stores a processor writes, their state transaction (get,
prepare at commit, flush, abort) and memory as one backend; ``disk.py`` the other backend,
a partition's RocksDB database and its checkpoint (the persistent store); ``restore.py``
reading a changelog back into a store partition, from the beginning or from the offset its
backend already holds; ``kept.py`` the state of partitions this process does not own at the
moment, kept and tailed so that a partition that comes back restores only what was written
since. docs/engine.md, "State stores".
"""
