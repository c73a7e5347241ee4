/* hs_device: the device plug-ins' hook table (hs_device.h); empty until one installs itself. */
#include "hs_device.h"

const hs_device_plugin *hs_device_cuda = NULL;
