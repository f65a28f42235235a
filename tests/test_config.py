from __future__ import annotations

import pytest

from veralith.config import ConfigError, Settings, load_settings, settings


@pytest.mark.parametrize("raw, value", [("1", True), ("TRUE", True), ("yes", True), ("On", True),
                                        ("0", False), ("off", False), ("No", False)])
def test_booleans(raw, value):
    assert load_settings({"VERALITH_CACHE": raw}).cache is value


def test_wrong_value_names_the_variable():
    with pytest.raises(ConfigError, match="VERALITH_BATCH_SIZE"):
        load_settings({"VERALITH_BATCH_SIZE": "many"})
    with pytest.raises(ConfigError, match="VERALITH_CACHE"):
        load_settings({"VERALITH_CACHE": "maybe"})
    with pytest.raises(ConfigError, match="VERALITH_BACKEND"):
        load_settings({"VERALITH_BACKEND": "gpt"})
    with pytest.raises(ConfigError, match="VERALITH_PRICING"):
        load_settings({"VERALITH_PRICING": "{not json"})


def test_defaults_and_sdk_fallbacks():
    s = load_settings({"OPENAI_API_KEY": "sk-test-123", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert s.judge_model == "gpt-4o" and s.sufficiency_fallback == 1.0 and s.calibration_min_traces == 20
    assert s.base_url == "http://127.0.0.1:9/v1"
    assert "sk-test-123" not in repr(s) and "sk-test-123" not in str(s.model_dump())
    assert s.api_key.get_secret_value() == "sk-test-123"


def test_pricing_json():
    s = load_settings({"VERALITH_PRICING": '{"local": {"input": 0, "output": 0}}'})
    assert s.pricing == {"local": {"input": 0.0, "output": 0.0}}
    with pytest.raises(ConfigError, match="input"):
        load_settings({"VERALITH_PRICING": '{"m": {"output": 1}}'})


def test_override_validates_and_restores():
    before = settings.batch_size
    with settings.override(batch_size=1) as s:
        assert settings.batch_size == 1 == s.batch_size
    assert settings.batch_size == before
    with pytest.raises(ConfigError, match="unknown"), settings.override(bach_size=2):
        pass
    with pytest.raises(ConfigError, match="batch_size"), settings.override(batch_size=0):
        pass
    with pytest.raises(RuntimeError), settings.override(batch_size=3):
        raise RuntimeError("x")
    assert settings.batch_size == before
    with pytest.raises(AttributeError):
        settings.batch_size = 3


def test_every_setting_is_in_env_example():
    from conftest import REPO
    text = (REPO / ".env.example").read_text()
    for name in Settings.model_fields:
        assert f"VERALITH_{name.upper()}" in text, name


def test_the_gate_policy_default_is_every_cell_but_complete_grounded():
    """The documented default of VERALITH_GATE_FAIL_CELLS. Configuration is core and may not import
    the result model (tests/test_architecture.py), so it is written out there and held here to the one
    cell vocabulary, veralith.models.CELLS."""
    from veralith.models import CELLS
    assert Settings.model_fields["gate_fail_cells"].default == tuple(c for c in CELLS if c != "complete_grounded")
