r"""Chapter 15: *RGB-Event ISP: The Dataset and Benchmark* (Lu et al., ICLR 2025), in miniature.

- :mod:`.simulator`: a quad-Bayer RAW + event camera simulated from scikit-image's bundled images
  (the stand-in for the paper's confidential hybrid vision sensor), and a rendered ColorChecker;
- :mod:`.conventional`: the seven-step conventional ISP of ``RGBE_ISP.m`` with every stage inspectable,
  ColorChecker calibration (white balance from patch 21, least-squares CCM), PSNR/SSIM/CIEDE2000;
- :mod:`.models`: one learnable ISP per class of the benchmark and the event-guided UNet;
- :mod:`.benchmark`: the book-scale benchmark (one seed per call, cached by the notebooks).
"""

from .benchmark import MODEL_ORDER, calibrate, calibration_report, run_benchmark
from .conventional import (NEUTRAL_PATCH, ConventionalISP, apply_ccm, bin_quads, delta_e2000, demosaic_quad_bayer,
                           denoise, fit_ccm, image_metrics, normalize_raw, patch_means, psnr, ssim,
                           white_balance_gains)
from .models import (MODEL_CLASSES, EventUNet, PlainCNN, TwoStageISP, UNet, build_model, charbonnier,
                     count_parameters, predict_isp, to_tensors, train_isp)
from .simulator import (COLORCHECKER_SRGB, GAMMA, TEST_SCENES, TRAIN_SCENES, Capture, SensorConfig, dark_frame,
                        expose, fixed_pattern_noise, linear_to_camera, linear_to_display, load_scenes, luminance,
                        mosaic_quad_bayer, motion_subframes, pack_quad_bayer, quad_bayer_pattern,
                        render_colorchecker, simulate_capture, simulate_dataset, simulate_events,
                        srgb_to_linear, unpack_quad_bayer)
