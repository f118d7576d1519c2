"""``python -m bench``: the project's consumers against the copier (:mod:`bench.projectors`)."""

from bench.projectors import main

raise SystemExit(main())
