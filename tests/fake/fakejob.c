/* fakejob.c - placeholder for the fake training job. */
int main(void)
{
    return 0;
}
