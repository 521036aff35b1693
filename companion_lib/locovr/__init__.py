r"""LocoVR in miniature (Takeyama et al., ICLR 2025): generated homes, a two-person social-force
simulator standing in for the VR captures, and the paper's three tasks (global path, trajectory,
goal prediction) with their metrics and baselines."""

from .floorplan import (ROOM_M, astar_route, check_connected, clearance_m, downsample, make_floorplan,
                        sample_free_point, to_cell, to_metres)
from .metrics import ade_fde, chamfer, goal_error, min_separation, path_efficiency
from .sim import Episode, SocialForceParams, anisotropy, route_cost, simulate_episode, social_forces, wall_force
from .tasks import (FUT, OBS, TinyUNet, TrajectoryMLP, astar_baseline, constant_velocity, extract_path,
                    generate_dataset, goal_from_map, make_samples, predict_maps, predict_trajectory,
                    random_goal_baseline, rasterise, train_trajectory, train_unet, trajectory_features,
                    goal_targets, nearest_furniture_goal, path_chamfers, goal_errors, map_patch)
from .experiment import TRAJECTORY_MODELS, dataset_stats, map_tasks, run_experiment

__all__ = [n for n in dir() if not n.startswith("_")]
