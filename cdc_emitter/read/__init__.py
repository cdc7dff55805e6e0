"""Reading a CDCv2 topic back: the verifying consumer (`verify_topic`,
local, with decode workers), ``read_cdc`` (Spark, for topics past one machine), and following a
topic as it grows: `TopicFollower`, the ``cdcv2`` streaming source, ``read_cdc_stream`` and
``apply`` into a Delta table.

May import ``protocol``, ``kafka``, ``spark`` and ``errors``; never the sink.
"""
