"""Pauses (contract §7): routing tickets to human queues, validating the humans' answers."""
