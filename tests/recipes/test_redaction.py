"""The recipe projection keeps routing and removes every deployment detail and secret
(R12.4). Pure functions: no database, no network."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recipes.redaction import REDACTED, kind_of_key, kind_of_value, recipe_project
from srbench.canonical import sha256_hex
from srbench.simulator.config import load_config


def paths(result) -> dict[str, str]:
    return {r["path"]: r["kind"] for r in result.redactions}


def test_bundled_simulator_config_keeps_all_routing_and_drops_only_non_routing_sections():
    config = load_config().raw
    result = recipe_project(config)

    assert result.projection["routers"] == config["routers"]
    assert result.projection["models"] == config["models"]
    assert paths(result) == {
        "$.seed": "non_routing_section",
        "$.stall_seconds": "non_routing_section",
    }


def test_projection_hash_is_the_canonical_sha256_and_independent_of_key_order():
    config = {"routing": {"decisions": [{"name": "a", "rules": {"keywords": ["x"]}}]}, "x": 1}
    reordered = json.loads(json.dumps(config, sort_keys=True))
    first, second = recipe_project(config), recipe_project(reordered)

    assert first.projection_sha256 == sha256_hex(first.projection)
    assert first == second


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("api_key", "secret"),
        ("apiKey", "secret"),
        ("x-api-key", "secret"),
        ("preview_api_key_env", "secret"),
        ("password", "secret"),
        ("client_secret", "secret"),
        ("access_token", "secret"),
        ("Authorization", "secret"),
        ("tls", "secret"),
        ("base_url", "url"),
        ("baseURL", "url"),
        ("webhook", "url"),
        ("endpoints", "endpoint"),
        ("preferred_endpoints", "endpoint"),
        ("upstream", "endpoint"),
        ("host", "host"),
        ("address", "host"),
        ("ip", "ip"),
        ("port", "port"),
        ("metrics_port", "port"),
        ("cache_dir", "path"),
        ("model_path", "path"),
        ("extra_headers", "headers"),
        ("api_base_env", "env_reference"),
    ],
)
def test_deployment_and_credential_keys_are_recognised_by_name(key, kind):
    assert kind_of_key(key) == kind


@pytest.mark.parametrize(
    "key",
    [
        "keywords",
        "max_tokens",
        "tokens_per_second",
        "sort_key",
        "default_model",
        "session_percent",
        "decisions",
        "modelRefs",
        "algorithm",
        "domain",
        "priority",
    ],
)
def test_routing_keys_are_kept(key):
    assert kind_of_key(key) is None


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("https://gpu-a.example.com/v1", "url"),
        ("grpc://router:50051", "url"),
        ("10.20.30.40", "ip"),
        ("primary 192.168.1.7 then backup", "ip"),
        ("fd00::beef", "ip"),
        ("[2001:db8::1]:8443", "ip"),
        ("::1", "ip"),
        ("fe80::1%eth0", "ip"),
        ("router.internal:9000", "host"),
        ("localhost:8801", "host"),
        ("localhost", "host"),
        ("gpu-7.cluster.local", "host"),
        ("api.openai.com", "host"),
        ("/var/lib/router/models", "path"),
        ("~/weights", "path"),
        ("./config/router.yaml", "path"),
        ("C:\\models\\x.bin", "path"),
        ("${OPENAI_API_KEY}", "env_reference"),
        ("sk-proj-AbCdEf0123456789xyz", "secret"),
        ("hf_abcdefghijklmnopqrstuvwx", "secret"),
        ("AKIAABCDEFGHIJKLMNOP", "secret"),
        ("Bearer abc.def.ghi-123", "secret"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "secret"),
        ("-----BEGIN RSA PRIVATE KEY-----", "secret"),
        ("OhJ3lNsKAhUEDtlZZuBLvtAyMRmRMvlA", "secret"),
    ],
)
def test_deployment_details_and_secrets_are_recognised_by_value_shape(value, kind):
    assert kind_of_value(value) == kind


@pytest.mark.parametrize(
    "value",
    [
        "step by step",
        "prove",
        "sim-strong",
        "vllm-sr/mom-v1-blend",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen2-72B-Instruct-GPTQ-Int4-AWQ-Model",
        "qwen2.5-7b",
        "claude-3.5-sonnet",
        "std::vector",
        "keyword:prove",
        "12:30",
        "c++",
        "e" * 64,  # a config hash is not a secret
        "Let me work through the question carefully before answering.",
    ],
)
def test_routing_values_are_kept(value):
    assert kind_of_value(value) is None


def test_secret_named_entries_are_removed_whatever_their_string_and_paths_say_where():
    config = {
        "routing": {
            "decisions": [
                {"name": "math", "modelRefs": ["m1"], "password": "hunter2", "port": 8080},
            ],
            "auth": {"type": "apikey", "key": "abc"},
            "token_budget": 4096,
        }
    }
    result = recipe_project(config)

    assert result.projection == {
        "routing": {"decisions": [{"name": "math", "modelRefs": ["m1"]}], "token_budget": 4096}
    }
    assert paths(result) == {
        "$.routing.decisions[0].password": "secret",
        "$.routing.decisions[0].port": "port",
        "$.routing.auth": "secret",
    }
    assert [r["found_by"] for r in result.redactions] == ["key name"] * 3


def test_list_items_are_replaced_in_place_so_indices_stay_true():
    result = recipe_project({"signals": {"keywords": ["math", "10.0.0.9", "algebra"]}})

    assert result.projection["signals"]["keywords"] == ["math", REDACTED, "algebra"]
    assert paths(result) == {"$.signals.keywords[1]": "ip"}


def test_a_key_that_is_an_address_is_not_repeated_in_its_redaction_path():
    result = recipe_project({"routing": {"http://10.9.8.7:8000": {"weight": 1}, "a": 1}})

    assert result.projection == {"routing": {"a": 1}}
    assert json.dumps(result.redactions).count("10.9.8.7") == 0
    assert result.redactions[0]["kind"] == "url"


def test_non_routing_sections_are_omitted_and_named():
    config = {
        "decisions": [],
        "vllm_endpoints": [{"address": "10.0.0.1", "port": 8000}],
        "api": {"listen": "0.0.0.0:8080"},
        "observability": {"tracing": {"endpoint": "http://jaeger:4317"}},
    }
    result = recipe_project(config)

    assert result.projection == {"decisions": []}
    assert set(paths(result)) == {"$.vllm_endpoints", "$.api", "$.observability"}
    assert "10.0.0.1" not in json.dumps(result)


def test_deeply_nested_values_are_cut_rather_than_recursing_forever():
    deep: dict = {"x": "leaf"}
    for _ in range(200):
        deep = {"x": deep}
    result = recipe_project({"routing": deep})

    assert any(r["kind"] == "too_deep" for r in result.redactions)


json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=12, alphabet="abcxyz -_")
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8, alphabet="abcdefgh_"), children, max_size=4),
    ),
    max_leaves=20,
)


@given(
    json_values,
    st.sampled_from(
        [
            "198.51.100.23",
            "sk-live-ZZZ0123456789abcdefgh",
            "https://planted.example.net/x",
            "/srv/planted/path",
            "fd00::a1b2",
        ]
    ),
)
def test_a_planted_secret_anywhere_in_a_routing_section_never_survives(value, planted):
    def plant(v):
        if isinstance(v, dict):
            return {**{k: plant(x) for k, x in v.items()}, "note": f"see {planted}"}
        if isinstance(v, list):
            return [plant(x) for x in v] + [planted]
        return v

    config = {"routing": plant({"tree": value})}
    result = recipe_project(config)

    assert planted not in json.dumps(result.projection)
    assert planted not in json.dumps(result.redactions)
    assert result.redactions  # and it is listed
