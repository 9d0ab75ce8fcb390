@0xf32e4759335ddfdb;
# The wire between traind nodes: a worker (or the chief) and one parameter
# server shard. Tensors travel as Data blobs of little-endian float32,
# addressed by offsets in floats into the shard's flat buffer, in chunks of
# at most 1 MiB (core/placement.h, chunkShard), so no message nears Cap'n
# Proto's traversal limit and small calls never wait behind huge ones.
# Every call is checked before it touches state (known chunk, right length,
# right step); a call that fails a check fails with a message saying why.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("traind::wire");

struct ShardStatus {
  ready @0 :Bool;         # the chief has initialised or restored the shard
  globalStep @1 :Int64;
  stopping @2 :Bool;      # the job is done; the shard exits soon
  workers @3 :List(UInt32);  # the worker tasks connected to the shard, in order
  lastStep @4 :Int64;     # the global step the job ends at, as the chief that
                          # initialised the shard said (0 before it did)
  diverged @5 :Text;      # stopping because the chief's run diverged: why,
                          # in the chief's words (empty otherwise)
}

struct SharedRegionOffer {
  # A sealed memfd of the worker's (rpc/shared_region.h): /proc/<pid>/fd/<fd>
  # on a host whose identity (boot id, pid namespace) is `host`, `bytes`
  # long, starting with `token`.
  host @0 :Text;
  pid @1 :UInt32;
  fd @2 :UInt32;
  bytes @3 :UInt64;
  token @4 :Data;
}

interface ParameterShard {
  hello @0 (architectureHash :Text, shardIndex :UInt32, workerTask :UInt32,
            wireVersion :UInt32, sharedRegion :SharedRegionOffer, updateRule :Text,
            dataRule :Text, trainingRule :Text, checkpointDir :Text, trainingSet :Text,
            forwardRule :Text, chunks :UInt32)
      -> (status :ShardStatus, sharedRegionMapped :Bool, sharedRefusal :Text);
  # Checks that the peer trains the same architecture, computing the same
  # forward pass (forwardRule of core/model_spec.h), with the same update
  # rule (updateRule of core/model_spec.h: the chief initialises the
  # optimizer's slots and checkpoints them), talks to the shard it thinks
  # it does, and cuts the shard into the same chunks (wireVersion:
  # kWireVersion of rpc/shard_server.h; 0 from a peer that predates it;
  # chunks: chunksFingerprint of core/placement.h, which says it of the
  # chunks themselves: through shared memory no length would tell).
  # A worker may offer a region of shared memory (rpc/shared_region.h);
  # sharedRegionMapped says whether the ps mapped it, sharedRefusal why not.
  # dataRule (core/model_spec.h) and trainingRule (core/cluster_spec.h) must
  # be the ps's own; the chief's checkpointDir that of the chief that
  # initialised the shard (another job's chief on the same ports is
  # refused). trainingSet (contentText of core/dataset.h) must be the first
  # worker's that said one: every worker reads the same examples (empty
  # from a peer that predates it: not compared). A worker task with a
  # connection open already is refused as overloaded: a second process for
  # the task, or a restarted one whose old connection the ps has not yet
  # seen close (it retries).

  status @1 () -> (status :ShardStatus);

  initialize @2 (slot :UInt32, offset :UInt64, data :Data) -> ();
  # The chief writes one chunk of the parameters (slot 0) or of optimizer
  # slot k (slot k + 1) before markReady.

  markReady @3 (globalStep :Int64, lastStep :Int64) -> ();
  # Initialisation is complete: serve pulls from this global step on, in a
  # job that ends at lastStep (the chief's max_steps or epochs; every worker
  # must end there, ShardStatus.lastStep tells them).

  pushAndPull @4 (workerTask :UInt32, step :Int64, offset :UInt64, data :Data, minStep :Int64,
                  sharedFloats :UInt64, sharedChunks :UInt32)
      -> (accepted :Bool, globalStep :Int64, data :Data, stopping :Bool);
  # One chunk of a gradient computed from the parameters of global step
  # `step`, and that chunk's parameters back once the chunk's step has
  # reached minStep; globalStep is the step of the values sent (in sync
  # training a chunk is a step ahead of the shard once it has been applied,
  # so its reply need not wait for the other chunks). accepted is false when
  # the shard dropped the gradient as stale. One call per chunk: the shard
  # applies and answers a chunk while the next ones still arrive, so
  # parameters flow back while gradients flow in. With sharedFloats > 0 the
  # gradient (that many floats, data empty) is in the shared region's
  # gradient buffer at the chunk's place in the worker's layout, and the
  # reply's parameters go to the same place in its parameter buffer instead
  # of into data. Such a call may cover sharedChunks consecutive chunks from
  # the one at offset (0 counts as 1; sharedFloats is their floats in all):
  # nothing crosses the socket but the call, which costs both sides more
  # than a chunk's floats do. It answers once every chunk may be answered,
  # globalStep the lowest of theirs, accepted false if any was dropped.
  # stopping: the shard has been told to stop (by the chief, a signal or
  # POST /stop), so the job is over for the worker.

  pull @5 (minStep :Int64, offset :UInt64, length :UInt64, intoSharedRegion :Bool)
      -> (globalStep :Int64, data :Data, stopping :Bool);
  # Parameters [offset, offset + length) once the shard's global step has
  # reached minStep (sync training waits here for the next step); with
  # intoSharedRegion into the shared region's parameter buffer (at the
  # chunk's place in the worker's layout), data empty. globalStep is the
  # step of the values sent, as for pushAndPull: a chunk applied while
  # others of its shard wait for gradients is a step ahead of them.
  # stopping as for pushAndPull.

  readState @6 (slot :UInt32, offset :UInt64, length :UInt64)
      -> (globalStep :Int64, data :Data);
  # Parameters (slot 0) or an optimizer slot of one chunk, for the chief's
  # checkpoints; globalStep is the step of the chunk's values (chunkStep).

  stop @7 (diverged :Text) -> ();
  # The job is done: the shard answers, then exits cleanly. With `diverged`
  # (the chief's words: its loss, a gradient or its parameters are no
  # longer finite) the job failed instead: the shard says so in its status,
  # so that the other workers stop as the chief did, and exits 3 (core/error.h:
  # Diverged). Empty from a chief that predates it.

  saved @8 (globalStep :Int64, checkpoint :Text) -> ();
  # The chief has written `checkpoint` (a path on its host), which holds
  # the shard's state at globalStep: the lowest step the readState replies
  # it was written from reported; or it has restored the shard from it. The
  # ps reports it in its /status, so that trainctl can tell whether the ps
  # holds steps no checkpoint has.

  holdAt @9 (globalStep :Int64) -> (globalStep :Int64);
  # Sync training, the chief's checkpoint: the shard applies no gradient
  # that would take a chunk past globalStep (it keeps their sums) until
  # releaseHold, the chief's connection closes, the chief has made no call
  # for ServedShard::kHoldSilenceSeconds (rpc/shard_service.h), or the hold
  # has stood for kMaxHoldSeconds (core/parameter_shard.h). -1 holds at the highest step a
  # chunk holds now and answers with it at once; a step answers once every
  # chunk holds it, with the shard's global step then. A step beyond the
  # next one, or below a chunk's, holds at the nearest of those instead.

  releaseHold @10 () -> ();
  # Lifts holdAt's hold: the sums it kept are applied.
}
