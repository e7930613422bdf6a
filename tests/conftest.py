"""Shared fixtures: every test starts from the same torch seed; one Ray cluster per session."""
import pytest
import torch


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)
    return 0


@pytest.fixture(scope="session")
def ray_cluster():
    """One small local Ray cluster for the whole test session (2 CPUs, 200 MB object store); its
    address, for subprocesses (``RAY_ADDRESS``). Shut down at the end: nothing is left running."""
    import ray  # the `cluster` extra, installed by `make test`
    if not ray.is_initialized():
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
