// Denormal floats flushed to zero, for the calling thread and every thread
// it starts afterwards (a thread starts with its creator's floating-point
// environment): traind's main calls it before it starts any thread.
//
// Why: Adam's first moment of a weight whose gradient stays zero (a ReLU
// unit that died) decays by beta1 every step and passes into the denormal
// range after some 600 steps; every CPU operation on such a value then
// takes a microcode assist, which made a ps's updates several times slower
// (docs/benchmarks.md, "CUDA": "Denormal floats on the ps"). TensorFlow
// flushes denormals in its compute threads for the same reason; values
// under 1.2e-38 change no update measurably.
#pragma once

namespace traind {

// Sets flush-to-zero and denormals-are-zero on x86 (MXCSR); elsewhere
// nothing (not measured there).
void flushDenormalsToZero();

// Whether the calling thread flushes denormal results to zero.
bool flushesDenormalsToZero();

}  // namespace traind
