// The push-service stand-ins are a target of their own so that benchmarks can use them
// without the test frameworks; tests get them with the rest of the support.
@_exported import BelfryTestServers
