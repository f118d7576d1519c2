"""``python -m bench.txn_probe``: back-to-back transactions against aiokafka's retry delays
(:func:`bench.engine_cost.txn_probe`)."""

from bench.engine_cost import txn_probe

if __name__ == "__main__":
    raise SystemExit(txn_probe())
