/* The public header must compile alone, as strict C11, with every warning an error. */
#include <oomless.h>

int main(void)
{
    oom_budget b = OOM_BUDGET_INIT;
    return oom_budget_make(&b, OOM_GiB * 24, OOM_DEFAULT_SAFETY_MARGIN) == OOM_OK ? 0 : 1;
}
