/* plan.c - plan a LoRA fine-tune from C and print the micro-batch and accumulation.
 *
 *   cc plan.c $(pkg-config --cflags --libs oomless) -o plan && ./plan llama-3.1-8b rtx-4090
 */
#include <oomless.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    oom_plan_options *options = NULL;
    oom_plan_result *result = NULL;
    char *env = NULL;
    int err;

    if ((err = oom_plan_options_create(&options)) ||
        (err = oom_plan_options_set(options, "model", argc > 1 ? argv[1] : "llama-3.1-8b")) ||
        (err = oom_plan_options_set(options, "method", "lora")) ||
        (err = oom_plan_options_set(options, "seq", "2048")) ||
        (err = oom_plan_options_set(options, "gpu", argc > 2 ? argv[2] : "rtx-4090")) ||
        (err = oom_plan_options_run(&result, options)) ||
        (err = oom_plan_format(&env, result, "env")))
        fprintf(stderr, "plan: %s\n", oom_last_message());
    else
        fputs(env, stdout);
    oom_free(env);
    oom_plan_free(result);
    oom_plan_options_free(options);
    return err ? 1 : 0;
}
