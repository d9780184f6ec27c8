"""Client for the HTTP API of `updraft serve` (routes shaped like SGLang's; see
rollout/serve/rollout_service.h for the contract). Standard library only."""

from .client import Client, UpdraftError

__all__ = ["Client", "UpdraftError"]
