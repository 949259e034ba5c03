/*
 * calib/calib.h - the calibration store: measured (or traced) memory lines saved as JSONL and
 * looked up by GPU, command and workload (calibration.c), their evaluation (fit.c) and the
 * estimate a line gives (calibration_estimate.c). Uses gpu, core.
 */
#ifndef OOMLESS_CALIB_CALIB_H
#define OOMLESS_CALIB_CALIB_H

#include "core/core.h"
#include "gpu/gpu.h"

#endif
