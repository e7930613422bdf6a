"""Shared fixtures: every test starts from the same torch seed."""
import pytest
import torch


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)
    return 0
