/* fake_nvml.c - placeholder, replaced by the full fake in the next commit. */
int nvmlInit_v2(void);
int nvmlInit_v2(void)
{
    return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
}
