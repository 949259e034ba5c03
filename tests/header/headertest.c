/* The public header must compile alone, as strict C11, with every warning an error: the _INIT
 * macros included. */
#include <oomless.h>

int main(void)
{
    oom_budget b = OOM_BUDGET_INIT;
    oom_plan_request r = OOM_PLAN_REQUEST_INIT;
    oom_target t = OOM_TARGET_INIT;
    oom_run_event e = OOM_RUN_EVENT_INIT;
    (void)r;
    oom_target_dispose(&t);
    oom_run_event_dispose(&e);
    return oom_budget_make(&b, OOM_GiB * 24, OOM_DEFAULT_SAFETY_MARGIN) == OOM_OK ? 0 : 1;
}
