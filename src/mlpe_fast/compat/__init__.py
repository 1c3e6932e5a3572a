"""Compatibility layers for other load generators.

``endpoints_client`` is a look-alike of the MLPerf Endpoints reference
client's ``HTTPEndpointClient`` backed by mlpe-fast's engine;
``endpoints_launcher`` runs the reference's own command line with that
client patched in.  Importing this package never imports the reference.
"""
