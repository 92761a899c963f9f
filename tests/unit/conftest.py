"""Shared fixtures: the real captures in tests/fixtures, turned into facts the planner reads."""
import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from replay_data import H200_QUERY, H200_TOPO, RTX_NUMACTL, RTX_QUERY, RTX_TOPO, host_facts, make_model_dir


@pytest.fixture(scope="session")
def rtx_host():
    """The 8x RTX PRO 6000 Blackwell box of the story: PCIe, GPUs 0-3 on node 0 and 4-7 on node 1."""
    return host_facts(RTX_TOPO, RTX_QUERY, RTX_NUMACTL)


@pytest.fixture(scope="session")
def h200_host():
    return host_facts(H200_TOPO, H200_QUERY)


@pytest.fixture
def model_facts(tmp_path):
    def load(name):
        return model_config.model_facts(make_model_dir(tmp_path, name))
    return load
