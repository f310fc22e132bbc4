"""torchtitan's Trainer as its checkpoint sees it (train_state: step and
ntokens_seen, 0.2.2 and 0.3.0 alike), for scripts/ckpt_crossing.py and
scripts/tt030_crossing.py."""


class TrainState:
    def __init__(self):
        self.step, self.ntokens_seen = 0, 0

    def state_dict(self):
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, sd):
        self.step, self.ntokens_seen = int(sd["step"]), int(sd["ntokens_seen"])
