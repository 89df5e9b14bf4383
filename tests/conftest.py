"""Shared test settings.

One torch thread: CI shares 2 cores with other work, where one thread was up to 10x faster than two.
"""

import torch

torch.set_num_threads(1)


_NETWORK_LOADS = (
    r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//",  # tags that fetch
    r"\bimport\b[^;\n]*\bfrom\s*[\"'](?:https?:)?//",  # ES module imports from a CDN
)


def loads_from_network(page: str) -> bool:
    """True if an HTML page would fetch anything: a remote script/link/img/iframe or a CDN import."""
    import re

    return any(re.search(pattern, page) for pattern in _NETWORK_LOADS)
