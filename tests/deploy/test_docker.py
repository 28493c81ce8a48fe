"""The Dockerfile and compose file say what the issue asks for: the checks a `docker build` / `docker compose up`
would make plain, on text, since there is no Docker engine here."""

from __future__ import annotations

import fnmatch
import re

import yaml

from tests.deploy.manifests import DOCKER, OFFLINE_PARTS, ROOT

DOCKERFILE = (DOCKER / "Dockerfile").read_text()
COMPOSE = yaml.safe_load((DOCKER / "compose.yaml").read_text())


def stages() -> dict[str, str]:
    """Stage name -> its instructions."""
    parts = re.split(r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", DOCKERFILE, flags=re.MULTILINE | re.IGNORECASE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def resolved(stage: str) -> str:
    """A stage's instructions with those of the stages it builds FROM."""
    body = stages()[stage]
    parent = re.search(rf"^FROM\s+(\S+)\s+AS\s+{re.escape(stage)}\s*$", DOCKERFILE, re.MULTILINE | re.IGNORECASE)
    base = parent.group(1) if parent else ""
    return (resolved(base) if base in stages() else "") + body


def test_service_targets_run_as_non_root_with_a_healthcheck_and_no_torch():
    for target in ("cpu", "cpu-nobundle", "gpu", "gpu-nobundle"):
        text = resolved(target)
        user = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
        assert user and not user[-1].startswith(("root", "0")), target
        assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, re.MULTILINE), target
        assert "torch" not in text and "[train" not in text, target
        assert "MS_BUNDLE_DIR=/bundle" in text and "MS_HOST=0.0.0.0" in text, target


def test_cpu_and_gpu_targets_install_their_extras_on_their_bases():
    # The cpu venv: the `service` extra's dependencies read from pyproject.toml, then the package with no deps.
    assert "['optional-dependencies']['service']" in stages()["cpu-deps"] and "train" not in stages()["cpu-deps"]
    assert "--no-deps" in stages()["cpu-app"]
    gpu = stages()["gpu-venv"]
    assert "[service,gpu]" in gpu and "pip uninstall -y onnxruntime" in gpu
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:\S+-cudnn-runtime-", DOCKERFILE, re.MULTILINE)
    assert re.search(r"^FROM \$\{CUDA_IMAGE\} AS gpu-python", DOCKERFILE, re.MULTILINE)
    # The bundle is baked in by the `cpu`/`gpu` targets only, from a build argument.
    assert "COPY --chown=root:root ${BUNDLE} /bundle" in stages()["cpu"] + stages()["gpu"]
    assert "/bundle" not in stages()["cpu-deps"] + stages()["cpu-venv"] + stages()["gpu-venv"]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes; a folder pattern covers its contents."""
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            result = not negate
    return result


def test_dockerignore_sends_what_the_dockerfile_copies_and_keeps_out_the_rest():
    patterns = [
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()[:1] not in ("", "#")
    ]
    copied = re.findall(r"^COPY\s+(?!--from)(?:--\S+\s+)*(.+)\s+\S+$", DOCKERFILE, re.MULTILINE)
    sources = [s.replace("${BUNDLE}", "bundles/all-minilm-l6-v2") for line in copied for s in line.split()]
    assert sources, "no COPY found"
    for source in sources:
        assert (ROOT / source).exists() or source.startswith("bundles/"), source
        assert not ignored(source, patterns), f"{source} is copied by the Dockerfile but excluded by .dockerignore"
    offline = [f"metricsearch/{part}/x.py" for part in OFFLINE_PARTS]
    for kept_out in (".venv/bin/python", "var/items/x", ".git/HEAD", "docker/.env", "tests/x.py", *offline):
        assert ignored(kept_out, patterns), kept_out
    assert not ignored("metricsearch/service/app.py", patterns) and not ignored("metricsearch/core/x.py", patterns)


def test_compose_pins_qdrant_and_points_the_service_at_it():
    services = COMPOSE["services"]
    image = services["qdrant"]["image"]
    assert re.fullmatch(r"qdrant/qdrant:v\d+\.\d+\.\d+", image), image
    assert any(v.endswith(":/qdrant/storage") for v in services["qdrant"]["volumes"])
    service = services["metricsearch"]
    assert service["environment"]["MS_QDRANT_URL"] == "http://qdrant:6333"
    assert service["env_file"] == ".env" and (DOCKER / ".env.example").exists()
    assert service["read_only"] is True and "/tmp" in service["tmpfs"]
    assert all(p.startswith("127.0.0.1:") for p in service["ports"]), "publish on the host's loopback only"


def test_compose_loadtest_profile_runs_locust_headless_and_bounded():
    loadtest = COMPOSE["services"]["loadtest"]
    assert loadtest["profiles"] == ["loadtest"]
    assert loadtest["depends_on"]["metricsearch"]["condition"] == "service_healthy"
    args = " ".join(loadtest["command"])
    assert "--host=http://metricsearch:8000" in args and "--run-time=" in args and "--stop-timeout=" in args
    assert 'ENTRYPOINT ["locust", "-f", "/loadtest/locustfile.py", "--headless"]' in stages()["loadtest"]
    assert "readyz" in " ".join(COMPOSE["services"]["metricsearch"]["healthcheck"]["test"])


def test_compose_tracing_profile_runs_jaeger_and_the_service_traces_only_when_asked():
    jaeger = COMPOSE["services"]["jaeger"]
    assert jaeger["profiles"] == ["tracing"]
    assert re.fullmatch(r"jaegertracing/jaeger:\d+\.\d+\.\d+", jaeger["image"]), jaeger["image"]
    assert jaeger["ports"] == ["127.0.0.1:16686:16686"], "the UI on the host's loopback only; OTLP stays inside"
    assert "--set=receivers.otlp.protocols.http.endpoint=0.0.0.0:4318" in jaeger["command"]
    environment = COMPOSE["services"]["metricsearch"]["environment"]
    # Empty unless the caller sets it: tracing stays off in a plain `docker compose up`.
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318" in (DOCKER / "compose.yaml").read_text()
