/* web_options.c - the web page's API built natively: prints what oomw_options() gives the page
 * (the options its selects and defaults come from), for tests/python/test_vocabulary.py. */
#include <stdio.h>

int oomw_options(void);
const char *oomw_output(void);

int main(void)
{
    int rc = oomw_options();
    fputs(oomw_output(), stdout);
    return rc;
}
