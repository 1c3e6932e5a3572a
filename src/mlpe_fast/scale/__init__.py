"""A point shared among engines: several engine processes on this machine
(``--engines``) or on the nodes of a Ray cluster (``--ray``).

* :mod:`.split` -- how many engines a point uses and how its streams split;
* :mod:`.leases` -- the global query sequence, leased to engines in blocks;
* :mod:`.messages` -- what the driver and its engines say to each other;
* :mod:`.engine_process` -- one engine, whatever link carries it;
* :mod:`.driver` -- starting, leasing, merging, failing closed;
* :mod:`.local` -- engine processes and pipes on this machine;
* :mod:`.clock` -- other machines' clocks, measured and mapped;
* :mod:`.ray_cluster` -- engine actors and node agents on a Ray cluster.
"""
