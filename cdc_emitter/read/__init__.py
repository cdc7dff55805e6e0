"""Reading a CDCv2 topic back: verifying it, reading it with Spark, following it as it grows.

May import ``protocol``, ``kafka``, ``spark`` and ``errors``; never the sink.

- `cdc_emitter.read.verify`: `verify_topic`, the verifying consumer (local); it decodes in
  worker processes on a large topic (`cdc_emitter.read.decode_pool`, each worker
  `cdc_emitter.read.decode_worker`);
- `cdc_emitter.read.spark_reader`: ``read_cdc``, the same verdicts with Spark, for topics past
  one machine: Spark decodes (`cdc_emitter.read.spark_decode`) and groups the updates
  (`cdc_emitter.read.spark_groups`), the driver replays the counts
  (`cdc_emitter.read.spark_replay`);
- `cdc_emitter.read.follow`: `TopicFollower`, the reader kept between reads of a growing topic;
  over it, the ``cdcv2`` streaming source (`cdc_emitter.read.stream_source`) and
  ``read_cdc_stream`` (`cdc_emitter.read.cdc_stream`);
- `cdc_emitter.read.apply`: a Delta table kept equal to the topic's collection.
"""
