r"""LucidPPN: unambiguous prototypical parts, colour separated from shape (Pach et al., ICLR 2025).

A prototypical-part network ("this looks like that") explains a prediction by image patches that
resemble learned prototypes; a patch prototype mixes shape, texture and colour, so the user cannot
tell which of them mattered. LucidPPN splits the evidence: ShapeTexNet sees only the grey image
$x_S$ and gives part maps $Z_S$; ColorNet sees only each location's colour and gives $Z_C$; the two are
fused as $z_{km} = z^C_{km}\odot\mathrm{sg}(z^S_{km})$, max-pooled to $r_{km}$ and averaged over parts,
$p_m = \frac1K\sum_k r_{km}$. Modules:

* :mod:`.birds`: the synthetic isoluminant birds (classes = head colour x body shape, part masks);
* :mod:`.model`: both branches, the fusion, the three BCE losses, a black-box CNN baseline;
* :mod:`.training`: training, prediction, the part hit rate, colour prototypes, top patches, one experiment.
"""

from .birds import (HUE_TEMPLATES, hue_palette, BODY_GREY, HEAD_LUMINANCE, LUMA_WEIGHTS, PALETTE, PART_NAMES, SHAPES, BirdGeometry,
                    BirdSet, check_images, draw_geometry, isoluminant_colour, luminance, make_birds,
                    render_birds, swap_head_colours, swapped_labels, to_grey)
from .model import (GREY_MEAN, GREY_STD, BlackBoxCNN, ColorNet, LucidOutput, LucidPPN, ShapeTexNet, backbone,
                    fuse, lucid_losses, resize_masks)
from .training import (blackbox_predict, check_birds, colour_prototypes, experiment_data, fit_blackbox, fit_lucidppn,
                       leaky_data, lucid_predict, lucidppn_from_state, nearest_palette_colour, part_hit_rate, part_iou, run_experiment,
                       run_leaky, top_patches)

__all__ = [
    "HUE_TEMPLATES", "hue_palette", "BODY_GREY", "HEAD_LUMINANCE", "LUMA_WEIGHTS", "PALETTE", "PART_NAMES", "SHAPES", "BirdGeometry", "BirdSet",
    "check_images", "draw_geometry", "isoluminant_colour", "luminance", "make_birds", "render_birds",
    "swap_head_colours", "swapped_labels", "to_grey",
    "GREY_MEAN", "GREY_STD", "BlackBoxCNN", "ColorNet", "LucidOutput", "LucidPPN", "ShapeTexNet", "backbone",
    "fuse", "lucid_losses", "resize_masks",
    "blackbox_predict", "check_birds", "colour_prototypes", "experiment_data", "lucidppn_from_state", "fit_blackbox", "fit_lucidppn", "lucid_predict",
    "nearest_palette_colour", "part_hit_rate", "part_iou", "run_experiment", "top_patches", "leaky_data", "run_leaky",
]
