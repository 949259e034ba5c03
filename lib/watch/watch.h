/*
 * watch/watch.h - live monitoring: sampling GPUs and the processes on them with warning bands
 * and trends (watch_monitor.c), and the run-event log that probe/run write and watch reads
 * (watch_events.c). Uses gpu, core.
 */
#ifndef OOMLESS_WATCH_WATCH_H
#define OOMLESS_WATCH_WATCH_H

#include "core/core.h"
#include "gpu/gpu.h"

#endif
