build/lib/gpu/gpu.o: lib/gpu/gpu.c lib/gpu/gpu.h lib/core/err.h \
 /usr/local/cuda/include/cuda_runtime_api.h \
 /usr/local/cuda/include/crt/host_defines.h \
 /usr/local/cuda/include/builtin_types.h \
 /usr/local/cuda/include/device_types.h \
 /usr/local/cuda/include/driver_types.h \
 /usr/local/cuda/include/vector_types.h \
 /usr/local/cuda/include/surface_types.h \
 /usr/local/cuda/include/texture_types.h \
 /usr/local/cuda/include/cuda_device_runtime_api.h lib/gpu/launch.h
lib/gpu/gpu.h:
lib/core/err.h:
/usr/local/cuda/include/cuda_runtime_api.h:
/usr/local/cuda/include/crt/host_defines.h:
/usr/local/cuda/include/builtin_types.h:
/usr/local/cuda/include/device_types.h:
/usr/local/cuda/include/driver_types.h:
/usr/local/cuda/include/vector_types.h:
/usr/local/cuda/include/surface_types.h:
/usr/local/cuda/include/texture_types.h:
/usr/local/cuda/include/cuda_device_runtime_api.h:
lib/gpu/launch.h:
