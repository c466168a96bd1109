"""Operating medverify: how its verdicts move over time (:mod:`medverify.ops.drift`, the
``medverify ops`` commands and the drift gauges of the service's ``/metrics``)."""
