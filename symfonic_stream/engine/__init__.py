"""The one engine every consumer runs: consume → process → transactional produce."""
