"""One module per runnable consumer: each builds its Topology and hands it to the engine.

``symfonic-stream run <name>`` imports ``consumers.<name>`` and awaits its ``main``.
"""
