"""medverify's built-in claim verifier: a small MiniLM cross-encoder, 3-way.

``Verifier.predict(pairs)`` gives (n, 3) probabilities in :data:`LABELS` order for
(claim, evidence) pairs; see docs/verifier.md and card.md for the model and its numbers.
"""

from __future__ import annotations

from medverify.verifier.infer import Verifier, get_verifier, label_pairs
from medverify.verifier.model import LABELS, save_verifier

__all__ = ["LABELS", "Verifier", "get_verifier", "label_pairs", "save_verifier"]
