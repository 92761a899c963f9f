"""model_config: the `model` contract on every real config in tests/fixtures/configs."""
import json

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from replay_data import CONFIG_NAMES, make_model_dir

GIB = 1 << 30

# Expected facts, taken from the key fields in tests/fixtures/configs/SOURCES.md and the formulas in
# docs/ARCHITECTURE.md: GQA/MHA KV = 2 x layers x kv_heads x head_dim x 2 bytes; MLA KV = layers x
# (kv_lora_rank + qk_rope_head_dim) x 2 bytes.
EXPECTED = {
    "MiniMaxAI__MiniMax-M2.5.bf16-converted.partial": ("gqa", 2 * 62 * 8 * 128 * 2, (256, 8, 1536), None, 3),
    "MiniMaxAI__MiniMax-M2.5.partial": ("gqa", 2 * 62 * 8 * 128 * 2, (256, 8, 1536), ("fp8", 128), 3),
    "Qwen__Qwen3-235B-A22B": ("gqa", 2 * 94 * 4 * 128 * 2, (128, 8, 1536), None, 0),
    "Qwen__Qwen3-30B-A3B-FP8": ("gqa", 2 * 48 * 4 * 128 * 2, (128, 8, 768), ("fp8", 128), 0),
    "Qwen__Qwen3-30B-A3B": ("gqa", 2 * 48 * 4 * 128 * 2, (128, 8, 768), None, 0),
    "deepseek-ai__DeepSeek-V3": ("mla", 61 * (512 + 64) * 2, (256, 8, 2048), ("fp8", 128), 1),
    "meta-llama__Meta-Llama-3.1-70B": ("gqa", 2 * 80 * 8 * 128 * 2, None, None, 0),
    "meta-llama__Meta-Llama-3.1-8B": ("gqa", 2 * 32 * 8 * 128 * 2, None, None, 0),
    "moonshotai__Kimi-K2.5": ("mla", 61 * (512 + 64) * 2, (384, 8, 2048), ("compressed-tensors", None), 0),
    "nvidia__DeepSeek-V3.1-NVFP4": ("mla", 61 * (512 + 64) * 2, (256, 8, 2048), ("nvfp4", None), 1),
    "nvidia__Kimi-K2.5-NVFP4": ("mla", 61 * (512 + 64) * 2, (384, 8, 2048), ("nvfp4", None), 0),
    "nvidia__Llama-3.1-70B-Instruct-FP8": ("gqa", 2 * 80 * 8 * 128 * 2, None, ("fp8", None), 0),
    "nvidia__MiniMax-M2.5-NVFP4": ("gqa", 2 * 62 * 8 * 128 * 2, (256, 8, 1536), ("nvfp4", None), 3),
}


def test_every_fixture_has_an_expectation():
    assert sorted(EXPECTED) == CONFIG_NAMES


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_config_fixture(tmp_path, name):
    attention, kv_bytes, moe, quant, mtp = EXPECTED[name]
    facts = model_config.model_facts(make_model_dir(tmp_path, name))
    assert facts["attention"] == attention
    assert facts["kv_cache_bytes_per_token"] == kv_bytes
    if moe is None:
        assert facts["moe"] is None
    else:
        assert (facts["moe"]["num_experts"], facts["moe"]["experts_per_token"],
                facts["moe"]["intermediate_size"]) == moe
    if quant is None:
        assert facts["quantization"] is None
    else:
        assert facts["quantization"]["method"] == quant[0]
        assert facts["quantization"]["block_size"] == quant[1]
    assert facts["mtp_layers"] == mtp
    assert facts["weights_bytes_estimated"] is True
    assert facts["weights_bytes"] > 0
    assert json.loads(json.dumps(facts)) == facts  # plain JSON data


def test_multimodal_wrapper_reads_text_config(tmp_path):
    facts = model_config.model_facts(make_model_dir(tmp_path, "moonshotai__Kimi-K2.5"))
    assert facts["architecture"] == "KimiK25ForConditionalGeneration"
    assert facts["model_type"] == "kimi_k25" and facts["text_model_type"] == "kimi_k2"
    assert facts["num_layers"] == 61 and facts["max_position_embeddings"] == 262144
    assert facts["remote_code"] is True
    # The INT4 quantization_config lives inside text_config; attention stays in 16 bits.
    assert facts["quantization"]["format"] == "pack-quantized"
    assert "attention" in facts["quantization"]["unquantized_groups"]


def test_modelopt_quant_config_file_is_read_beside_config_json(tmp_path):
    facts = model_config.model_facts(make_model_dir(tmp_path, "nvidia__DeepSeek-V3.1-NVFP4"))
    assert facts["quantization"]["method"] == "nvfp4"
    assert facts["quantization"]["format"] == "modelopt"
    assert facts["quantization"]["kv_cache"] == "fp8"
    # The same config alone (no hf_quant_config.json) is a plain BF16 model, twice as large or more.
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "config.json").write_text((tmp_path / "nvidia__DeepSeek-V3.1-NVFP4" / "config.json").read_text())
    bf16 = model_config.model_facts(str(alone))
    assert bf16["quantization"] is None
    assert bf16["weights_bytes"] > 3 * facts["weights_bytes"]


@pytest.mark.parametrize("name,known_bytes,tolerance", [
    # model.safetensors.index.json metadata.total_size of the real checkpoints (SOURCES.md)
    ("meta-llama__Meta-Llama-3.1-8B", 16060522496, 0.02),
    ("meta-llama__Meta-Llama-3.1-70B", 141107412992, 0.02),
    # Qwen3-30B-A3B shape in BF16: 56.87 GiB on disk
    ("Qwen__Qwen3-30B-A3B", int(56.87 * GIB), 0.03),
    # MiniMax-M2.5 FP8: vLLM logged 53.75 GiB per GPU at TP=4
    ("MiniMaxAI__MiniMax-M2.5.partial", int(4 * 53.75 * GIB), 0.05),
])
def test_weight_estimate_close_to_real_checkpoints(tmp_path, name, known_bytes, tolerance):
    facts = model_config.model_facts(make_model_dir(tmp_path, name))
    assert abs(facts["weights_bytes"] - known_bytes) / known_bytes < tolerance


def test_quantized_estimate_is_smaller_in_the_right_ratio(tmp_path):
    bf16 = model_config.model_facts(make_model_dir(tmp_path, "Qwen__Qwen3-30B-A3B"))
    fp8 = model_config.model_facts(make_model_dir(tmp_path, "Qwen__Qwen3-30B-A3B-FP8"))
    assert 0.45 < fp8["weights_bytes"] / bf16["weights_bytes"] < 0.6
    fp8_minimax = model_config.model_facts(make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial"))
    nvfp4_minimax = model_config.model_facts(make_model_dir(tmp_path, "nvidia__MiniMax-M2.5-NVFP4"))
    assert 0.5 < nvfp4_minimax["weights_bytes"] / fp8_minimax["weights_bytes"] < 0.7


def test_index_total_size_wins_over_estimate(tmp_path):
    directory = make_model_dir(tmp_path, "meta-llama__Meta-Llama-3.1-8B")
    with open(directory + "/model.safetensors.index.json", "w") as handle:
        json.dump({"metadata": {"total_size": 16060522496}, "weight_map": {}}, handle)
    facts = model_config.model_facts(directory)
    assert facts["weights_bytes"] == 16060522496
    assert facts["weights_bytes_estimated"] is False
    assert facts["weights_source"] == "index"


def test_safetensors_file_sizes_when_no_index(tmp_path):
    directory = make_model_dir(tmp_path, "meta-llama__Meta-Llama-3.1-8B")
    for i, size in enumerate((1000, 2345)):
        with open("%s/model-%05d.safetensors" % (directory, i), "wb") as handle:
            handle.write(b"\0" * size)
    facts = model_config.model_facts(directory)
    assert facts["weights_bytes"] == 3345 and facts["weights_source"] == "files"


def test_bare_config_json_path(tmp_path):
    directory = make_model_dir(tmp_path, "nvidia__Llama-3.1-70B-Instruct-FP8")
    # Reading config.json directly still picks up its hf_quant_config.json neighbour.
    facts = model_config.model_facts(directory + "/config.json")
    assert facts["quantization"]["method"] == "fp8"


def test_renamed_model_is_read_from_its_numbers(tmp_path):
    directory = make_model_dir(tmp_path, "meta-llama__Meta-Llama-3.1-8B")
    config = json.load(open(directory + "/config.json"))
    config.update(architectures=["SomethingNewForCausalLM"], model_type="something_new",
                  num_key_value_heads=4, num_attention_heads=16, head_dim=64)
    json.dump(config, open(directory + "/config.json", "w"))
    facts = model_config.model_facts(directory)
    assert facts["architecture"] == "SomethingNewForCausalLM"
    assert facts["kv_cache_bytes_per_token"] == 2 * 32 * 4 * 64 * 2
    assert facts["attention"] == "gqa"
    config["num_key_value_heads"] = 1
    json.dump(config, open(directory + "/config.json", "w"))
    assert model_config.model_facts(directory)["attention"] == "mqa"
    config["num_key_value_heads"] = 16
    json.dump(config, open(directory + "/config.json", "w"))
    assert model_config.model_facts(directory)["attention"] == "mha"


@pytest.mark.parametrize("content,needle", [
    (b"", "empty"),
    (b"\x00\x01garbage{", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"model_type": "llama", "num_hidden_layers": 2}', "architectures"),
    (b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}', "num_hidden_layers"),
    (b'{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": "two", "num_attention_heads": 4}', "non-negative integer"),
])
def test_bad_configs_raise_readable_errors(tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(model_config.ModelConfigError) as err:
        model_config.model_facts(str(path))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_paths(tmp_path):
    with pytest.raises(model_config.ModelConfigError, match="does not exist"):
        model_config.model_facts(str(tmp_path / "nope"))
    with pytest.raises(model_config.ModelConfigError, match="has no config.json"):
        model_config.model_facts(str(tmp_path))


@pytest.mark.parametrize("pattern,name,matches", [
    ("re:.*self_attn.*", "model.layers.1.self_attn.q_proj", True),
    ("model.layers.1.self_attn*", "model.layers.1.self_attn.o_proj", True),
    ("gate", "model.layers.1.block_sparse_moe.gate", True),
    ("gate", "model.layers.1.mlp.gate_proj", False),
    ("re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "model.layers.1.mlp.experts.1.gate_proj", False),
    ("lm_head", "lm_head", True),
])
def test_ignore_pattern_semantics(pattern, name, matches):
    assert model_config._pattern_matches(pattern, name) is matches
