"""Shared fixtures: GPU tests skip cleanly without CUDA; CPU tests run everywhere."""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: long-running (huge tensors, many processes)")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="no CUDA device: GPU test skipped")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device():
    return torch.device("cuda", torch.cuda.current_device())


def poison_like(t: torch.Tensor) -> torch.Tensor:
    """Fill a tensor with NaN so that any element a kernel fails to write shows up."""
    return t.fill_(float("nan"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(int(os.environ.get("CAKE_TEST_SEED", "0")))
