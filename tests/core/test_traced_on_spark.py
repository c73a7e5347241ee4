"""A ``@traced`` function of a Spark driver script, mapped by a local Spark job: its Python
workers have no copy of the driver's ``__main__``. Apart from test_traced.py, which the
sanitizer runs take whole: the JVM must not get a sanitizer runtime preloaded."""

from __future__ import annotations

import json
import subprocess

import pytest

from _procs import env
from _util import python_command


SPARK_DRIVER = """
import json, sys
import hotspan
from pyspark.sql import SparkSession

@hotspan.traced(category="math")
def square(x):
    return x * x

if __name__ == "__main__":
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        print(json.dumps(spark.sparkContext.parallelize(range(6), 2).map(square).collect()))
    finally:
        spark.stop()
"""


@pytest.mark.slow
def test_a_spark_job_maps_a_traced_function_of_the_driver_script(tmp_path):
    """The whole case, on a local Spark: its Python workers have no copy of the driver's
    ``__main__``."""
    pytest.importorskip("pyspark")
    script = tmp_path / "driver.py"
    script.write_text(SPARK_DRIVER)
    done = subprocess.run(
        [*python_command(), str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env(PYSPARK_PYTHON=python_command()[0], PYSPARK_DRIVER_PYTHON=python_command()[0]),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, 1, 4, 9, 16, 25]
