"""The Kafka protocol for clients on a broker's listener.

`services` is the boundary to the rest of the broker (`BrokerServices`, implemented by the
integrator); `server` runs the listener over `quorum.wire.transport.serve`; one module per
api (or small group) turns a decoded request into calls on the services and encodes the
answer at the request's version.
"""
