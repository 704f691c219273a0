import VaporTesting
import BelfryServer
public enum TS {}
