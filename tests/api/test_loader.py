"""Reading manifests: kubectl's multi-document rules, sources, and clear errors for bad input."""

from pathlib import Path

import pytest
import yaml

from builders_api import inference_class, model_deployment
from gpufleet.api import (
    FieldError,
    Manifest,
    ManifestsInvalid,
    Skipped,
    Source,
    ValidationFailed,
    check_paths,
    load_manifests,
    parse_object,
)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def dump(*bodies: object) -> str:
    return yaml.safe_dump_all(bodies, sort_keys=False)


def only_failure(paths: list[Path]) -> ValidationFailed:
    (result,) = check_paths(paths)
    assert isinstance(result, ValidationFailed)
    return result


def test_documents_are_tagged_with_file_and_position(tmp_path: Path) -> None:
    text = dump(inference_class("a")) + "---\n---\n" + dump(None, inference_class("b"))
    manifests = load_manifests([write(tmp_path, "fleet.yaml", text)])
    path = tmp_path / "fleet.yaml"
    starts = [i for i, line in enumerate(text.splitlines(), start=1) if line.startswith("api")]
    assert [(m.source, m.obj.metadata.name) for m in manifests] == [
        (Source(str(path), 1, None, starts[0]), "a"),
        # the empty document and the null one are counted; the line is the object's first
        (Source(str(path), 4, None, starts[1]), "b"),
    ]
    assert str(manifests[1].source) == f"{path}:{starts[1]}"
    assert str(Source(str(path), 4)) == f"{path}#4"  # read without lines: the document


def test_list_is_unwrapped(tmp_path: Path) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": [inference_class("a"), model_deployment()]}
    path = write(tmp_path, "list.yaml", dump(body))
    manifests = load_manifests([path])
    items = [i for i, line in enumerate(path.read_text().splitlines(), start=1) if "- api" in line]
    assert [str(m.source) for m in manifests] == [f"{path}:{items[0]}", f"{path}:{items[1]}"]
    assert [m.source.item for m in manifests] == [0, 1]
    assert str(Source(str(path), 1, 1)) == f"{path}#1 items[1]"


def test_directory_reads_yaml_files_sorted_and_not_recursively(tmp_path: Path) -> None:
    write(tmp_path, "b.yml", dump(inference_class("b")))
    write(tmp_path, "a.yaml", dump(inference_class("a")))
    write(tmp_path, "notes.txt", "not a manifest")
    write(tmp_path, "sub/c.yaml", dump(inference_class("c")))
    assert [m.obj.metadata.name for m in load_manifests([tmp_path])] == ["a", "b"]
    assert [m.obj.metadata.name for m in load_manifests([tmp_path], recursive=True)] == [
        "a",
        "b",
        "c",
    ]


def test_timestamps_stay_strings_until_the_model_parses_them(tmp_path: Path) -> None:
    text = dump(inference_class()).replace(
        "metadata:\n", "metadata:\n  creationTimestamp: 2026-11-29T10:00:00Z\n"
    )
    (manifest,) = load_manifests([write(tmp_path, "c.yaml", text)])
    assert manifest.obj.to_manifest()["metadata"]["creationTimestamp"] == "2026-11-29T10:00:00Z"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "kind: [unclosed\n",
            "malformed YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'",
        ),
        (
            "a: 1\n  b: 2\n",
            "malformed YAML at line 2, column 4: mapping values are not allowed here",
        ),
        ("a: 1\na: 2\n", "malformed YAML at line 2, column 1: duplicate key 'a'"),
        ("", "contains no objects"),
        ("---\n---\n", "contains no objects"),
    ],
    ids=["unclosed flow", "bad indentation", "duplicate key", "empty file", "only empty documents"],
)
def test_unparsable_file_is_one_clear_error(tmp_path: Path, text: str, error: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    failure = only_failure([path])
    assert (failure.source, failure.errors) == (str(path), (FieldError("", error),))
    assert failure.lines() == [f"{path}: {error}"]


SUPPORTED = "InferenceClass, InferenceCluster, ModelDeployment, ModelReplica, PoolObservation, ReplicaObservation"


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            ["a", "list"],
            (FieldError("", "must be a mapping with apiVersion, kind, metadata and spec"),),
        ),
        (
            "just a string",
            (FieldError("", "must be a mapping with apiVersion, kind, metadata and spec"),),
        ),
        (
            {"metadata": {"name": "x"}},
            (FieldError("apiVersion", "is required"), FieldError("kind", "is required")),
        ),
        (
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "InferencePool",
                "metadata": {"name": "x"},
            },
            (FieldError("kind", f"unknown kind InferencePool: supported kinds are {SUPPORTED}"),),
        ),
        (
            {**inference_class(), "apiVersion": "gpufleet.io/v1beta1"},
            (
                FieldError(
                    "apiVersion",
                    f"gpufleet.io/v1beta1 is not supported: must be gpufleet.io/v1alpha1 (kinds {SUPPORTED})",
                ),
            ),
        ),
    ],
    ids=[
        "list document",
        "scalar document",
        "no apiVersion or kind",
        "unknown kind",
        "wrong version",
    ],
)
def test_bad_envelope_is_a_clear_error(
    tmp_path: Path, body: object, errors: tuple[FieldError, ...]
) -> None:
    failure = only_failure([write(tmp_path, "bad.yaml", dump(body))])
    assert failure.errors == errors


def test_missing_path_is_one_error_and_checking_goes_on(tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", dump(inference_class()))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    results = check_paths([tmp_path / "nope.yaml", empty_dir, good])
    assert [r.errors for r in results if isinstance(r, ValidationFailed)] == [
        (FieldError("", "no such file or directory"),),
        (FieldError("", "no *.yaml or *.yml files in this directory"),),
    ]
    assert [r.obj.metadata.name for r in results if isinstance(r, Manifest)] == ["h100-8x"]


def test_duplicate_object_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "dup.yaml", dump(inference_class(), inference_class()))
    with pytest.raises(ManifestsInvalid) as raised:
        load_manifests([path])
    (failure,) = raised.value.failures
    assert failure.errors == (
        FieldError("metadata.name", f"duplicate object: also defined at {path}:1"),
    )
    second = [i for i, line in enumerate(path.read_text().splitlines(), start=1)][
        path.read_text().splitlines().index("---") + 1
    ]
    assert failure.source == f"{path}:{second}"
    name_line = second + path.read_text().splitlines()[second - 1 :].index("  name: h100-8x")
    assert failure.error_sources == (f"{path}:{name_line}",)


def test_load_manifests_raises_every_failure(tmp_path: Path) -> None:
    bad_class = {**inference_class(), "spec": {"devices": []}}
    bad_deployment = {**model_deployment(), "spec": {"replicas": "two"}}
    path = write(tmp_path, "bad.yaml", dump(bad_class, bad_deployment))
    with pytest.raises(ManifestsInvalid) as raised:
        load_manifests([path])
    assert str(raised.value).splitlines() == [
        "InferenceClass h100-8x: spec.devices: must have at least 1 items",
        "ModelDeployment ml-team/llama: spec.replicas: must be an integer",
        "ModelDeployment ml-team/llama: spec.template: is required",
    ]


def test_objects_of_other_apis_are_skipped_not_refused(tmp_path: Path) -> None:
    foreign = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    path = write(tmp_path, "gitops.yaml", dump(foreign, inference_class("a"), service))
    results = check_paths([path])
    assert [type(r).__name__ for r in results] == ["Skipped", "Manifest", "Skipped"]
    skipped = results[0]
    assert isinstance(skipped, Skipped)
    assert skipped.note() == (
        f"skipped apps/v1 Deployment web: not a gpufleet.io object  ({path}:1)"
    )
    assert [m.obj.metadata.name for m in load_manifests([path])] == ["a"]
    with pytest.raises(ValidationFailed) as raised:  # parse_object itself stays strict
        parse_object(foreign)
    assert raised.value.errors[0] == FieldError(
        "apiVersion", f"apps/v1 is not supported: must be gpufleet.io/v1alpha1 (kinds {SUPPORTED})"
    )
