"""Reading a CDCv2 topic back: the verifying consumer (`verify_topic`,
local, with decode workers) and ``read_cdc`` (Spark, for topics past one machine).

May import ``protocol``, ``kafka``, ``spark`` and ``errors``; never the sink.
"""
