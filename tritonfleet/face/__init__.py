"""The face: what users type and read (the ``tritonfleet`` CLI, ``status``, generated docs)."""
