"""An independent reference implementation ("oracle") of contract §2-§5, for the tests.

``tests.reference.oracle`` validates raw AgentEvents, maps them to the typed (§3) and chunk
(§4) vocabularies and runs the offline ordering guard (§5), in plain Python written from
the contract's text alone (docs/contract.md), so that tests can compare the consumers'
output with something that does not share their code.

The rule: nothing in this package ever imports ``symfonic_stream`` (nor pydantic or
orjson). It uses the standard library only. An oracle that imported the code it checks
would only prove that the code equals itself.
"""
