/* other_major.c - linked into a copy of the oomless tool with -Wl,--wrap=oom_version_number: the
 * library it runs with says it is 2.0.0, a major version the tool was not built for. */
unsigned __wrap_oom_version_number(void);

unsigned __wrap_oom_version_number(void)
{
    return 20000;
}
