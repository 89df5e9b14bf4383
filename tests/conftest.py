"""Shared test settings.

One torch thread: CI shares 2 cores with other work, where one thread was up to 10x faster than two.
"""

import torch

torch.set_num_threads(1)
