"""The settings `local_session` gives a SparkSession (no JVM started: `session_settings` is plain
Python): a local driver gets the memory a million-trial lake's joins need; a cluster's master and
its own settings are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from wmo_lake.spark import DEFAULT_DRIVER_MEMORY, DRIVER_MEMORY_ENV, session_settings


@pytest.fixture(autouse=True)
def no_spark_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPARK_MASTER", "PYSPARK_SUBMIT_ARGS", DRIVER_MEMORY_ENV):
        monkeypatch.delenv(name, raising=False)


def test_a_local_session_gets_driver_memory_beyond_sparks_1g_default() -> None:
    for asked, master in ((None, "local[*]"), ("local[2]", "local[2]")):
        got, config = session_settings(asked)
        assert got == master
        assert config["spark.driver.memory"] == DEFAULT_DRIVER_MEMORY != "1g"


def test_the_driver_memory_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DRIVER_MEMORY_ENV, "12g")
    assert session_settings("local[1]")[1]["spark.driver.memory"] == "12g"


def test_a_clusters_master_and_memory_are_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    master, config = session_settings("spark://head:7077")
    assert master == "spark://head:7077" and "spark.driver.memory" not in config
    monkeypatch.setenv("SPARK_MASTER", "yarn")
    assert session_settings()[0] == "yarn"
    monkeypatch.delenv("SPARK_MASTER")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.master=k8s://x pyspark-shell")
    master, config = session_settings()
    assert master is None and "spark.driver.memory" not in config  # spark-submit's master stands


def test_a_local_session_logs_only_sparks_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's default profile printed ~8 lines of start-up warnings before every local
    `--engine spark` result; the config a local session points log4j2 at is errors only
    (checked here without a JVM; test_cli_sql.py runs one)."""
    from wmo_lake.spark import LOG_CONFIG

    options = session_settings("local[2]")[1]["spark.driver.extraJavaOptions"]
    assert options == f'-Dlog4j2.configurationFile="{LOG_CONFIG}"'
    settings = dict(
        line.split(" = ", 1)
        for line in LOG_CONFIG.read_text(encoding="utf-8").splitlines()
        if " = " in line and not line.startswith("#")
    )
    assert settings["rootLogger.level"] == "error"
    assert settings["logger.gateway.level"] == "error"  # (else PySpark resets the root to WARN)
    assert "spark.driver.extraJavaOptions" not in session_settings("spark://head:7077")[1]
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.driver.extraJavaOptions=-Dx=1 x")
    assert "spark.driver.extraJavaOptions" not in session_settings("local[2]")[1]  # the user's


def test_a_java_home_without_java_is_said_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Spark takes JAVA_HOME over the java on PATH: one pointing nowhere gave two shell errors
    and JAVA_GATEWAY_EXITED."""
    from wmo_lake.spark import local_session
    from wmo_lake.store import LakeError

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(LakeError, match=r"JAVA_HOME=.*nowhere has no bin/java: point it at a Java"):
        local_session()
