"""`rocketha-cluster`: the local cluster tool (processes, certificates, users) and the test
hosts it can put them on (network namespaces on a bridge). An entry point: it may import `ha`
and `controller`; only spark_app's demo, build.py and tests import it."""

__all__: list[str] = []
