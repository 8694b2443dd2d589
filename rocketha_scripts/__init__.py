"""The console scripts' entry points: each checks its extra, then imports the real main.

This is the entry-point shim pattern of conf/extras.py: a module per script whose first
statement is `require_extra(program, extra)` and whose second is the import of the real
`main`, so a command whose extra is missing says which in one line (exit status 2) before
anything that needs the extra is imported. The package itself imports nothing.

    rocketha-broker      server     rocketha_scripts.broker     -> ha.broker.main
    rocketha-controller  server     rocketha_scripts.controller -> controller.main
    rocketha-cluster     server     rocketha_scripts.cluster    -> ha.cluster.main
    rocketha-proxy       rocketmq   rocketha_scripts.proxy      -> connector.rmq_proxy.main

rocketha-admin (rocketha_admin), rocketha-console (controller.console.app) and
rocketha-pipeline (spark_app.locate) need no shim: they run on the base install.
"""

__all__: list[str] = []
