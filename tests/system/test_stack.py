"""The stack imports for real (docs/stack-notes.md, trap 2: importing GX could silently end the process)."""


def test_great_expectations_imports_and_validates() -> None:
    import great_expectations as gx
    import pandas as pd

    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_pandas("acks")
        .add_dataframe_asset("statuses")
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": pd.DataFrame({"status": [200, 204, 408, 424]})})
    )
    in_range = batch.validate(gx.expectations.ExpectColumnValuesToBeBetween(column="status", min_value=100, max_value=599))
    out_of_range = batch.validate(gx.expectations.ExpectColumnValuesToBeBetween(column="status", min_value=200, max_value=299))
    assert gx.__version__.startswith("1.")
    assert in_range.success is True
    assert out_of_range.success is False


def test_pyspark_and_airflow_sdk_import() -> None:
    import pyspark
    from airflow.sdk import dag, task

    assert pyspark.__version__.startswith("4.")
    assert callable(dag) and callable(task)
