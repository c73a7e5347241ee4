/* hs_device: the device plug-in's operations (hs_device.h); none until the module installs them. */
#include "hs_device.h"

const hs_device_ops *hs_device_cuda = NULL;

void hs_device_set_ops(const hs_device_ops *cuda) { hs_device_cuda = cuda; }
