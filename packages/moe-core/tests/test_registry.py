from dataclasses import dataclass, field
from typing import Any

import pytest
from codemoe.core import ConfigError, Registry, RegistryError


@dataclass
class AddConfig:
    offset: int = 1  # added to the input


class Adder:
    """adds a fixed offset"""

    def __init__(self, config: AddConfig, scale: int = 1) -> None:
        self.offset = config.offset * scale

    def __call__(self, x: int) -> int:
        return x + self.offset


@dataclass
class PipeConfig:
    first: dict[str, Any] = field(default_factory=lambda: {"name": "add"}, metadata={"kind": "op"})


def make_registry() -> Registry:
    registry = Registry()
    with registry.registering_as("plugin-a"):
        registry.register("op", "add", Adder, AddConfig)
        registry.register("op", "negate", lambda: (lambda x: -x), summary="negates")
        registry.register("pipe", "chain", lambda cfg: cfg, PipeConfig)
    return registry


def test_build_validates_options_and_passes_runtime_kwargs():
    registry = make_registry()
    op = registry.build("op", {"name": "add", "offset": 3}, scale=2)
    assert op(10) == 16
    assert registry.build("op", "negate")(4) == -4


def test_summary_defaults_to_the_factory_docstring():
    registry = make_registry()
    assert registry.get("op", "add").summary == "adds a fixed offset"
    assert registry.get("op", "add").plugin == "plugin-a"


def test_unknown_name_suggests_and_lists_valid_names():
    registry = make_registry()
    with pytest.raises(RegistryError) as err:
        registry.build("op", {"name": "ad"}, where="stages.x.op")
    message = str(err.value)
    assert "did you mean 'add'" in message
    assert "Valid op names: add, negate" in message
    assert "stages.x.op" in message


def test_unknown_kind_lists_known_kinds():
    with pytest.raises(RegistryError, match="Known kinds: op, pipe"):
        make_registry().get("router", "softmax_topk")


def test_duplicate_registration_names_both_plugins():
    registry = make_registry()
    with registry.registering_as("plugin-b"), pytest.raises(RegistryError) as err:
        registry.register("op", "add", Adder, AddConfig)
    assert "'plugin-a'" in str(err.value) and "'plugin-b'" in str(err.value)


def test_bad_option_names_key_value_and_expected_type():
    registry = make_registry()
    with pytest.raises(ConfigError) as err:
        registry.build("op", {"name": "add", "offset": "three"}, where="model.op")
    message = str(err.value)
    assert "model.op.offset" in message and "'three'" in message and "int" in message


def test_misspelled_option_suggests_the_field():
    with pytest.raises(ConfigError, match="did you mean 'offset'"):
        make_registry().build("op", {"name": "add", "ofset": 2})


def test_options_given_to_a_component_without_config_are_refused():
    with pytest.raises(ConfigError, match="takes no options"):
        make_registry().build("op", {"name": "negate", "x": 1})


def test_nested_component_specs_are_validated_with_their_path():
    registry = make_registry()
    assert registry.make_config("pipe", {"name": "chain", "first": {"name": "add", "offset": 2}}).first["offset"] == 2
    with pytest.raises(RegistryError, match="'stages.p.first'.*did you mean 'negate'"):
        registry.make_config("pipe", {"name": "chain", "first": {"name": "negat"}}, where="stages.p")


def test_lazy_import_targets_resolve_on_build():
    registry = Registry()
    registry.register("fn", "dirname", "os.path:dirname", summary="parent folder")
    assert registry.get("fn", "dirname").build(p="/a/b") == "/a"


def _nested(config: AddConfig, registry: Registry) -> Any:
    return registry.build("op", "add")


def test_portable_gives_what_another_process_builds_the_same_component_from():
    import pickle

    from codemoe.core.registry import build_portable

    registry = make_registry()
    registry.register("fn", "dirname", "os.path:dirname", summary="parent folder")
    registry.register("op", "nested", _nested, AddConfig)
    factory, config = pickle.loads(pickle.dumps(registry.portable("op", {"name": "add", "offset": 3})))
    assert build_portable(factory, config, scale=2)(10) == 16  # validated options and runtime kwargs, as build()
    assert build_portable(*pickle.loads(pickle.dumps(registry.portable("fn", "dirname"))), p="/a/b") == "/a"
    with pytest.raises(ConfigError, match="'stages.p.offst': unknown option"):
        registry.portable("op", {"name": "add", "offst": 3}, where="stages.p")
    with pytest.raises(ConfigError, match="op 'nested' at 'stages.p' builds nested components"):
        registry.portable("op", "nested", where="stages.p")


def test_config_class_must_be_a_dataclass():
    registry = Registry()
    registry.register("fn", "bad", "os.path:dirname", "os.path:sep")
    with pytest.raises(RegistryError, match="not a dataclass"):
        registry.make_config("fn", "bad")


# -- a component's options, as `codemoe components KIND NAME` prints them ----------------------------


@dataclass
class BaseOptions:
    steps: int = 10  # optimizer steps


@dataclass
class DocumentedOptions(BaseOptions):
    # where the model lives: auto | cpu | cuda
    # (auto picks the GPU when there is one)
    device: str = "auto"
    stop: list[str] = field(default_factory=lambda: ["\n"])  # the text ends before these
    router: Any = field(default_factory=lambda: {"name": "softmax_topk"}, metadata={"kind": "router"})
    beta: float = field(default=0.1, metadata={"doc": "KL coefficient"})
    undocumented: bool = False


def test_options_give_type_default_and_the_fields_comment_or_doc():
    registry = Registry()
    registry.register("stage", "documented", lambda config: config, DocumentedOptions)
    options = {o.name: o for o in registry.get("stage", "documented").options()}
    assert list(options) == ["steps", "device", "stop", "router", "beta", "undocumented"]
    assert (options["steps"].type, options["steps"].default, options["steps"].doc) == ("int", 10, "optimizer steps")
    assert options["device"].doc == "where the model lives: auto | cpu | cuda (auto picks the GPU when there is one)"
    assert (options["stop"].default, options["stop"].doc) == (["\n"], "the text ends before these")
    assert (options["router"].kind, options["router"].default) == ("router", {"name": "softmax_topk"})
    assert options["beta"].doc == "KL coefficient" and options["undocumented"].doc == ""
